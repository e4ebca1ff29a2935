"""One module per asset family. Each exposes ``build(partitions)`` returning its Dagster definitions.

Asset factories (rather than module-level assets) let the partitions follow the plugin registry,
so a plugin registered before :func:`eagle_assets.definitions.build_definitions` runs becomes a
partition.
"""

import warnings

import dagster as dg

from eagle_assets.assets import eagle3_checkpoint, eagle3_eval, hidden_states, prompts, reasoning_samples, token_sequences

# The graph, in pipeline order; a family joins this tuple once it really works.
ASSET_FAMILIES = (prompts, reasoning_samples, token_sequences, hidden_states, eagle3_checkpoint, eagle3_eval)

# Partitioned asset checks (files_match_rows, template_drift: one result per dataset partition) are a Dagster
# preview feature used knowingly; its warning would otherwise print on every load of the code location.
warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning)

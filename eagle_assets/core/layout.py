"""The one asset group every asset of the graph belongs to.

Dagster's asset graph draws group boxes only when the graph holds more than one group, and opens
them collapsed; with a single group it shows every asset at once, laid out in pipeline order.
"""

PIPELINE = "pipeline"

"""``eagle-assets demo``: the whole graph on an embedded verifier, with a short terminal display."""

"""Commands that look after a storage root: garbage collection, the kept checkpoints' listing and the
plugin report."""

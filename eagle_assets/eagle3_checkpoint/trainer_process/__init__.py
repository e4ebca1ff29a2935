"""Code that runs inside the speculators training process (``python -m`` or ``torchrun -m``
:mod:`.launch`): CPU adaptations, batches copied ahead to the device, the fused loss, loader workers."""

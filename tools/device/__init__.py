"""Device provisioning: the check of notebook 6's ``real_gpu`` path (and lesson 7's preset) on a bare CUDA machine.

``make gpu-wheelhouse`` (``gpu_wheelhouse``) downloads the wheels the check installs; ``bash tools/device/gpu_check.sh``
installs them on the device, builds the Qwen-shaped checkpoint, runs the notebook's code through ``gpu_check`` and
verifies the records.
"""

"""The Python side of ``benchmarks/gpu_check.sh``, the one script for a bare CUDA machine.

``make gpu-wheelhouse`` (``gpu_wheelhouse``) downloads the wheels the script installs; ``gpu_steps`` holds its steps
(the device and dtype tests on ``cuda``, notebook 6's and lesson 7's ``real_gpu`` runs), runs them and writes the
record; ``gpu_check`` runs notebook 6's code on the device and verifies its records.
"""

"""0 points (zero-work answers): nb01's two functions return zeros of the right shape and dtype and
raise ValueError on nothing; the conventions question is left as released. Before the fix a test cell whose every
case expected zeros (or a raised ValueError) gave such an answer a point.
"""
CASE = {
    "nb01_group_advantages": {
        "base": "release",
        "cells": {
            "compute_group_advantages": "import torch\n\n\ndef compute_group_advantages(rewards, group_ids, eps=1e-6):\n"
                                        "    return torch.zeros_like(rewards)\n",
            "group_relative_advantages": "def group_relative_advantages(rewards, num_generations, eps=1e-4):\n"
                                         "    return torch.zeros_like(rewards)\n",
        },
    },
}

"""Stand-ins for a ``GRPOTrainer``: attribute bags and views that record every attribute TRL's private methods
read (reported as ``trl_reads``), a single-process accelerator, and TRL's config and methods looked up with a
clear :class:`TrlApiChanged` when they moved."""

from __future__ import annotations

import os
import tempfile
import warnings

import torch


class TrlApiChanged(Exception):
    """TRL's private API no longer matches what this check was written for."""

    def __init__(self, what, detail=""):
        super().__init__(f"{what}: {detail}" if detail else what)
        self.what = what
        self.detail = detail


class MissingAttribute(AttributeError):
    pass


class StandIn:
    """Attribute bag standing in for a GRPOTrainer; records every attribute TRL reads from it."""

    def __init__(self, label, reads, **attrs):
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_reads", reads)
        object.__setattr__(self, "_attrs", dict(attrs))

    def __getattr__(self, name):
        attrs = object.__getattribute__(self, "_attrs")
        label = object.__getattribute__(self, "_label")
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in attrs:
            object.__getattribute__(self, "_reads").add(f"{label}.{name} (缺失)")
            raise MissingAttribute(f"{label}.{name}")
        object.__getattribute__(self, "_reads").add(f"{label}.{name}")
        return attrs[name]

    def __setattr__(self, name, value):
        object.__getattribute__(self, "_attrs")[name] = value


class RecordingView:
    """Forwards attribute reads to a real object (the GRPOConfig) and records them."""

    def __init__(self, label, target, reads):
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_reads", reads)

    def __getattr__(self, name):
        object.__getattribute__(self, "_reads").add(f"{object.__getattribute__(self, '_label')}.{name}")
        return getattr(object.__getattribute__(self, "_target"), name)


class RecordingInputs(dict):
    """The `inputs` dict of _compute_loss; records which keys TRL reads."""

    def __init__(self, reads, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._reads = reads

    def __getitem__(self, key):
        self._reads.add(f"inputs[{key!r}]")
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._reads.add(f"inputs[{key!r}]")
        return super().get(key, default)


def local_accelerator(reads, num_processes=1):
    """Single-process stand-in for accelerate.Accelerator: reduce / gather are identities."""
    return StandIn(
        "accelerator",
        reads,
        num_processes=num_processes,
        process_index=0,
        device=torch.device("cpu"),
        is_main_process=False,
        sync_gradients=True,
        reduce=lambda value, reduction="sum": value,
        gather=lambda value: value,
        gather_for_metrics=lambda value: value,
    )


def trl_config(GRPOConfig, **overrides):
    base = dict(
        output_dir=os.path.join(tempfile.gettempdir(), "grpo-course-trl-check"),
        use_cpu=True,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        per_device_train_batch_size=8,
        num_generations=4,
        gradient_accumulation_steps=1,
    )
    base.update(overrides)
    try:
        with warnings.catch_warnings():  # transformers' own deprecation notices are not about this check
            warnings.simplefilter("ignore", FutureWarning)
            return GRPOConfig(**base)
    except TypeError as error:  # a field was renamed or removed
        raise TrlApiChanged("GRPOConfig", str(error)) from None


def trl_method(GRPOTrainer, name):
    method = getattr(GRPOTrainer, name, None)
    if method is None:
        raise TrlApiChanged(f"GRPOTrainer.{name}", "方法不存在")
    return method

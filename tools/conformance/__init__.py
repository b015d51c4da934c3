"""The conformance check of lesson 3B against TRL's ``GRPOTrainer``; ``tools.trl_conformance`` is its public face.

``TRL_VERSION_WRITTEN_FOR``: the TRL release the course's TRL code (this check, lesson 7's ``GRPOTrainer`` runs) is
written for, read from its pin in ``environments/pt-cpu.txt`` (the pin's one home).
"""

from tools.preflight import pinned_version

TRL_VERSION_WRITTEN_FOR = pinned_version("trl")

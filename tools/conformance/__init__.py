"""The conformance check of lesson 3B against TRL's ``GRPOTrainer``; ``tools.trl_conformance`` is its public face."""

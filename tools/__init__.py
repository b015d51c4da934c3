"""Runtime the course notebooks import (response batching, log-probs, hardware snapshots, evidence JSON)."""

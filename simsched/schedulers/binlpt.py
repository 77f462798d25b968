"""BinLPT: workload-aware chunks assigned longest-processing-time first, then chunk self-scheduling."""

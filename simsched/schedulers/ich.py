"""Chunked work stealing over per-thread contiguous queues, and iCh's adaptive chunk self-scheduling."""

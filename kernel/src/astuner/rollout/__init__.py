"""Where a user's agent meets astuner: engines, the model handle, the runner."""

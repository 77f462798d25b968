"""Static partitions claimed with fetch-or plus work stealing (hybrid), and Cilk with fine-grain loops."""

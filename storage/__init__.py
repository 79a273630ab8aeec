"""Log storage for one partition replica: segments, offset index, leader-epoch cache and checkpoints."""

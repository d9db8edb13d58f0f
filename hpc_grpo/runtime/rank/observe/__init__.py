"""What a rank reports about itself: heartbeats and stack dumps for the watchdog, step phases,
GPU and host memory, start-up times and profile, trackers (W&B, TensorBoard) and the summary."""

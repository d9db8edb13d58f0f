"""One training rank: placement checks, GRPOConfig arguments, data, rewards, TRL callbacks."""

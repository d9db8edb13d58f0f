"""Before the model loads: the process group, the rank and hardware checks against the plan,
GRPOConfig's arguments, how the model loads, and the collector kept out of the imports' way."""

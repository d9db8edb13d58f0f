"""Checks before anything is queued: inputs on the login node, doctor on the nodes, site init."""

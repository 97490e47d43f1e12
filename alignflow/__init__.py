"""alignflow: the Prefect layers (flows, tasks) and the shipped tiny world, installed under one name."""

"""The shipped deployments (prefect.yaml) and recipes (recipes/<name>/<stage>.yaml): package data of
`alignflow.deployments`, found with importlib.resources (tasks/orchestration/recipes.py)."""

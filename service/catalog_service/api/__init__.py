"""HTTP routers: one module per resource; handlers stay thin and call plain functions."""

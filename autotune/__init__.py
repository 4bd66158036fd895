"""Autotuning: Optuna studies that search schedule recipes by measurement."""

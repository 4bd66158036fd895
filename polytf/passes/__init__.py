"""polytf package."""

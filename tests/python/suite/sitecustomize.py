# Imported by every Python process started with tests/python on its path: registers the backend
# "cohort" in the processes torch's test suite spawns (torch_suite.py).
try:
    import cohort  # noqa: F401
except ImportError:
    pass

"""``python -m runner explore``: scenarios drawn by Hypothesis on one backend target, failing
ones shrunk to minimal scenarios and written as suite files (``explorer``)."""

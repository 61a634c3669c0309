"""``python -m runner repro``: a failing result as a self-contained folder that reproduces it,
for an upstream bug report (``make.make_bundle``). ``command.repro_command`` is what the
reports show under each failure.
"""

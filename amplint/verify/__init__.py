"""`amplint verify`: run a script and amplint's rewrite of it, and compare.

harness.py runs inside each child process (it imports torch); runs.py starts
the children and reads what they measured; compare.py turns two measurements
into speedup, memory ratio, loss parity and a verdict.  Only this package
runs user code, and only in child processes.
"""

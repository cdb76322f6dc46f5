import os
import sys

# the registry helpers of the per-op suites
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ops"))

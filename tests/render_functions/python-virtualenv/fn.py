"""An exec function as real ones are written: a Python program importing a
library installed in a virtualenv that lives apart from the program (here
prometheus_client, from the Python client's virtualenv). It rewrites the
marker value and says which library it used on stderr."""
import sys

import prometheus_client

text = sys.stdin.read()
sys.stdout.write(text.replace("value: before", "value: after"))
print("imported " + prometheus_client.__name__, file=sys.stderr)

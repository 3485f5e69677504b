"""A backend whose native library is missing: importing it raises ImportError (a finding)."""

raise ImportError("libmcruntime.so: cannot open shared object file: No such file or directory")

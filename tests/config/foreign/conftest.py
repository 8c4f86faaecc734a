# verl_shim/ is a `verl` package for the example scripts' subprocesses only: collected (for
# doctests), it would put a package named verl on this process's path
collect_ignore = ["verl_shim"]
collect_ignore += [
    "maniskill_shim"
]  # (a mani_skill stand-in, put on the path by the tests that use it)

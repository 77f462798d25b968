"""The host's machine file: where ``native calibrate`` writes this machine's model and ``native validate`` reads it."""

# In the working directory: a file in a checkout's machines/ would ship as a built-in machine.
HOST_MACHINE_FILE = "host.toml"

#!/bin/sh
# Stands in for ssh in the launcher tests: `fake-rsh.sh HOST COMMAND...` drops the host and
# runs the command line here, through a shell, as sshd would on HOST.
shift
exec sh -c "$*"

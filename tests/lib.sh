# tests/lib.sh: what every test script shares. Each test reports one line,
# "ok - NAME" or "not ok - NAME", and tests/run_all.sh counts them.

report() {	# report STATUS NAME: STATUS 0 is a pass
	if [ "$1" -eq 0 ]; then echo "ok - $2"; else echo "not ok - $2"; fi
}

# The directory of the project, whatever the caller's working directory.
FENCE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}

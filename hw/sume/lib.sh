# Shared by the NetFPGA SUME scripts of this folder (sourced, never run). POSIX sh: the scripts run on the
# engine's host (Linux or FreeBSD) and reach the other machines through exec prefixes:
#
#   host_run CMD…   runs CMD on the host under test: `$HOST_EXEC CMD…` (HOST_EXEC is empty when fracflow runs on
#                   that host as root, `sudo -n` when it runs there as a user, `ssh -o BatchMode=yes root@hut`
#                   when it runs elsewhere);
#   peer_run CMD…   the same on the peer host of the TX-only/RX-only tests (PEER_EXEC);
#   flash_run CMD…  the same on the host with the Digilent Adept tools (FLASH_EXEC).
#
# The prefixes are split into words on purpose (no quoting inside them). ssh joins its arguments with spaces
# for the remote shell, so the commands these scripts send keep to words without quotes or shell characters.

# A testbed profile of kind `doubles` names a folder of tool doubles (relative to the project root); it goes
# first on PATH so every tool these scripts run, locally or through the ssh/sudo doubles, is a double.
if [ -n "${SUME_TOOL_PATH:-}" ]; then
	case $SUME_TOOL_PATH in
	/*) PATH="$SUME_TOOL_PATH:$PATH" ;;
	*) PATH="${FRACFLOW_ROOT:-.}/$SUME_TOOL_PATH:$PATH" ;;
	esac
	export PATH
fi

HOST_EXEC=${HOST_EXEC:-}
PEER_EXEC=${PEER_EXEC:-}
FLASH_EXEC=${FLASH_EXEC:-}

# `die MESSAGE`: a permanent failure (exit 1); `tempfail MESSAGE`: exit 75, which fracflow retries.
die() {
	echo "${0##*/}: $*" >&2
	exit 1
}
tempfail() {
	echo "${0##*/}: $*" >&2
	exit 75
}

host_run() {
	# shellcheck disable=SC2086 # the prefix is a word list
	$HOST_EXEC "$@"
}
peer_run() {
	# shellcheck disable=SC2086
	$PEER_EXEC "$@"
}
flash_run() {
	# shellcheck disable=SC2086
	$FLASH_EXEC "$@"
}

# `sha256_of FILE`: the file's SHA-256 in hex, with whichever tool this OS has.
sha256_of() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | awk '{print $1}'
	elif command -v sha256 >/dev/null 2>&1; then
		sha256 -q "$1"
	elif command -v shasum >/dev/null 2>&1; then
		shasum -a 256 "$1" | awk '{print $1}'
	else
		die "no sha256sum, sha256 or shasum on this host"
	fi
}

# `wait_for_line FILE REGEX SECONDS`: waits until FILE holds a line matching REGEX (extended), polling every
# 0.1 s; returns 1 after SECONDS. Servers print a line once they listen; starting the client earlier fails.
wait_for_line() {
	_tries=$(($3 * 10))
	while [ "$_tries" -gt 0 ]; do
		if [ -f "$1" ] && grep -Eq "$2" "$1"; then
			return 0
		fi
		sleep 0.1
		_tries=$((_tries - 1))
	done
	return 1
}

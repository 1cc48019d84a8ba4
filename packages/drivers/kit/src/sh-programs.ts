/**
 * POSIX shell programs a driver runs inside a sandbox with
 * `sh -c <program> <name> <args...>`. They only use what both a busybox
 * image and a Debian minbase have (sh, cat, stat, readlink, find, mkdir, mv,
 * chmod, kill), so any image with a POSIX `/bin/sh` works. Every dynamic
 * value is a positional argument, never spliced into the program text, so
 * a path or a command can never be read as shell syntax.
 *
 * Shared by every driver whose exec primitive cannot kill a process tree or
 * read a file on its own terms (Docker's exec API, the cloud vendors' exec
 * endpoints): the pid and secret files live wherever the driver says.
 */

/** Marks every process of one exec (value: the exec's key), so a kill also reaches those that left its process group. */
export const EXEC_TREE_VAR = "OPENMA_EXEC_TREE";

/** Prefix of the wrapper's own failures, told apart from the command's output by exit code 127 plus this line. */
export const WRAPPER_FAILURE = "openma-exec: ";

/**
 * Runs one command. `$1` pid file, `$2` secret env file (or empty), `$3` cwd
 * (or empty), then argv.
 *
 * The exec process is a session and process-group leader, so everything the
 * command starts shares the wrapper's group: a kill of `-<pid>` (from the
 * pid file) reaches the whole tree. The command runs as a background job so
 * that after it exits the wrapper can terminate leftover background jobs,
 * which would otherwise hold the output pipes open. A non-interactive shell
 * gives a background job /dev/null as stdin even with `0<&0` (busybox ash),
 * so stdin travels through fd 3; the wrapper then lets go of the pipe so
 * the command is its only reader.
 *
 * A process that calls `setsid` leaves that group, and there is no pid
 * namespace per exec here (making one needs CAP_SYS_ADMIN, which the
 * container does not have), so every process of the exec also inherits
 * `EXEC_TREE_VAR=<exec key>` in its environment: the kill finds stragglers
 * by that mark. Only a process that deliberately drops its environment
 * (`env -i`) and leaves the group escapes the kill; terminating the
 * container still ends it.
 *
 * The wrapper survives the group-wide TERM of its own cleanup and of a
 * wrapper nested inside it (a remote driver's wrapper running under a
 * stand-in's). While the command starts, TERM has a handler that does
 * nothing: an ignore would stay ignored in the command across exec, while a
 * handler is reset there. Once started, the wrapper ignores TERM, so `wait`
 * is never interrupted (an interrupted `wait` cannot tell the command's
 * status reliably in every shell). Trapping only after the start left a
 * window in which a fast nested command's cleanup ended the wrapper with 143.
 */
export const EXEC_WRAPPER = `
pidf=$1; envf=$2; cwd=$3; shift 3
fail() {
  printf '${WRAPPER_FAILURE}%s\\n' "$1" >&2
  rm -f -- "$pidf"
  [ -z "$envf" ] || rm -f -- "$envf"
  exit 127
}
mkdir -p -- "\${pidf%/*}" && echo $$ > "$pidf" || fail "cannot write pid file"
if [ -n "$envf" ]; then
  [ -r "$envf" ] || fail "secret environment file is missing"
  set -a; . "$envf"; set +a
  rm -f -- "$envf"
fi
if [ -n "$cwd" ]; then cd -- "$cwd" 2>/dev/null || fail "cannot change directory to $cwd"; fi
tree=\${pidf##*/}; export ${EXEC_TREE_VAR}="\${tree%.pid}"
command -v -- "$1" >/dev/null 2>&1 || fail "command not found: $1"
trap ':' TERM
exec 3<&0
"$@" 0<&3 3<&- &
child=$!
exec 0</dev/null 3<&-
trap '' TERM
wait "$child"; rc=$?
kill -TERM 0 2>/dev/null
rm -f -- "$pidf"
exit "$rc"
`;

/**
 * `$1` pid file, `$2` secret env file (or empty): SIGKILL to the wrapper's
 * process group, then to every process still carrying the exec's mark in
 * its environment (those that left the group), then removes both files.
 * The sweep repeats until a pass finds nobody, because a marked process may
 * fork between the listing and its kill (bounded: a fork bomb still ends
 * with the container). Exit 3 when the pid file is not there (the wrapper
 * has not started yet, or has already finished).
 */
export const KILL_TREE = `
[ -s "$1" ] || exit 3
p=$(cat -- "$1") || exit 3
kill -KILL -"$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null
tree=\${1##*/}; mark="${EXEC_TREE_VAR}=\${tree%.pid}"
pass=0
while [ "$pass" -lt 20 ]; do
  found=0
  for d in /proc/[0-9]*; do
    if tr '\\0' '\\n' < "$d/environ" 2>/dev/null | grep -qx -- "$mark"; then
      kill -KILL "\${d#/proc/}" 2>/dev/null && found=1
    fi
  done
  [ "$found" = 0 ] && break
  pass=$((pass + 1))
done
rm -f -- "$1"
[ -z "$2" ] || rm -f -- "$2"
exit 0
`;

/** `$1` file: stdin saved with mode 0600 (the directory is created 0700). */
export const WRITE_SECRET_FILE = `
umask 077
mkdir -p -- "\${1%/*}" && cat > "$1"
`;

/** Exit codes of the file programs (the rest is a plain failure with a message on stderr). */
export const FILE_EXIT = { notFound: 3, notAFile: 4, tooLarge: 5, isDirectory: 6 } as const;

/**
 * `$1` path. Prints `<size> <mtime> <type>` (lstat: a symlink leaf is not
 * followed) and, on the next line, the fully canonical path: `readlink -f`
 * when it resolves, else the canonical parent plus the leaf name.
 */
export const STAT_PATH = `
p=$1
[ -e "$p" ] || [ -L "$p" ] || exit ${FILE_EXIT.notFound}
s=$(stat -c '%s %Y %F' -- "$p") || exit 1
r=$(readlink -f -- "$p" 2>/dev/null) || r=""
if [ -z "$r" ]; then
  d=$(readlink -f -- "\${p%/*}/" 2>/dev/null) || d=\${p%/*}
  r="\${d%/}/\${p##*/}"
fi
printf '%s\\n%s' "$s" "$r"
`;

/**
 * `$1` path, `$2` max bytes. Follows symlinks. Writes the size to stderr
 * and exits `tooLarge` before reading anything bigger than the limit.
 */
export const READ_FILE = `
p=$1
[ -e "$p" ] || exit ${FILE_EXIT.notFound}
if [ ! -f "$p" ]; then stat -L -c '%F' -- "$p" >&2; exit ${FILE_EXIT.notAFile}; fi
s=$(stat -L -c '%s' -- "$p") || exit 1
if [ "$s" -gt "$2" ]; then printf '%s' "$s" >&2; exit ${FILE_EXIT.tooLarge}; fi
exec cat -- "$p"
`;

/**
 * `$1` path, `$2` octal mode for a new file. Content on stdin. Written to a
 * temporary sibling and renamed over the target, so readers never see a
 * partial file and a symlink at the target is replaced, not followed. An
 * existing regular file keeps its mode.
 */
export const WRITE_FILE = `
p=$1
d=\${p%/*}; [ -n "$d" ] || d=/
[ -d "$p" ] && [ ! -L "$p" ] && { printf 'is a directory\\n' >&2; exit ${FILE_EXIT.isDirectory}; }
mkdir -p -- "$d" || exit 1
m=$2
if [ -f "$p" ] && [ ! -L "$p" ]; then m=$(stat -c '%a' -- "$p") || exit 1; fi
t="$d/.\${p##*/}.openma-$$.tmp"
if (umask 077 && cat > "$t") && chmod "$m" "$t" && mv -f -- "$t" "$p"; then exit 0; fi
rm -f -- "$t"
exit 1
`;

/**
 * `$1` root, `$2` 1 for recursive, `$3` max entries, then directory names
 * to skip. One `<size> <mtime> <type>|<path>` line per entry, never
 * following symlinks; at most max + 1 lines, so the caller can tell the
 * listing was cut.
 */
export const LIST_DIR = `
root=$1; rec=$2; max=$3; shift 3
[ -e "$root" ] || exit ${FILE_EXIT.notFound}
[ -d "$root" ] || { printf 'not a directory\\n' >&2; exit ${FILE_EXIT.notAFile}; }
r=$(readlink -f -- "$root" 2>/dev/null) && root=$r
depth=""; [ "$rec" = 1 ] || depth="-maxdepth 1"
if [ $# -eq 0 ]; then
  find "$root" -mindepth 1 $depth -exec stat -c '%s %Y %F|%n' -- {} + 2>/dev/null | head -n $((max + 1))
else
  n=$#; i=0
  for name in "$@"; do
    i=$((i + 1))
    [ "$i" -gt 1 ] && set -- "$@" -o
    set -- "$@" -name "$name"
  done
  shift "$n"
  find "$root" -mindepth 1 $depth \\( -type d \\( "$@" \\) \\) -prune -o -exec stat -c '%s %Y %F|%n' -- {} + 2>/dev/null | head -n $((max + 1))
fi
exit 0
`;

/**
 * Framed stdin, for providers whose exec API can write to a process's stdin
 * but never close it (Daytona's session commands). `$1` a FIFO path, then
 * the command (usually the exec wrapper). The provider's stdin carries one
 * line per chunk, the chunk in base64, and a line holding only `.` for end
 * of input; the relay decodes into the FIFO the command reads, so the
 * command sees exactly the bytes written and a real end-of-file. The relay
 * runs in the background (stdin through fd 3, see EXEC_WRAPPER) and is
 * killed when the command ends, since the provider never ends its input.
 * The command gets a session of its own where `setsid` exists, so the
 * wrapper's cleanup (`kill -TERM 0`) stays inside it and never reaches the
 * provider's session shell; this shell survives it either way (`trap`).
 */
export const FRAMED_STDIN = `
f=$1; shift
mkdir -p -- "\${f%/*}" && rm -f -- "$f" && mkfifo -m 600 -- "$f" || { printf '${WRAPPER_FAILURE}%s\\n' "cannot make the stdin relay" >&2; exit 127; }
exec 3<&0
{
  while IFS= read -r line 0<&3; do
    [ "$line" = "." ] && break
    printf '%s\\n' "$line" | base64 -d || break
  done
} > "$f" &
relay=$!
exec 0</dev/null
trap ':' TERM
if command -v setsid >/dev/null 2>&1; then setsid "$@" < "$f"; else "$@" < "$f"; fi
rc=$?
kill "$relay" 2>/dev/null
exec 3<&-
rm -f -- "$f"
exit "$rc"
`;

/**
 * `$1` a temporary file already written next to the target, `$2` the
 * target, `$3` octal mode for a new file: moves the temporary file over the
 * target (readers never see a partial file; a symlink at the target is
 * replaced, not followed). An existing regular file keeps its mode.
 */
export const PLACE_FILE = `
t=$1; p=$2; m=$3
if [ -d "$p" ] && [ ! -L "$p" ]; then rm -f -- "$t"; printf 'is a directory\\n' >&2; exit ${FILE_EXIT.isDirectory}; fi
if [ -f "$p" ] && [ ! -L "$p" ]; then m=$(stat -c '%a' -- "$p") || { rm -f -- "$t"; exit 1; }; fi
if chmod "$m" "$t" && mv -f -- "$t" "$p"; then exit 0; fi
rm -f -- "$t"
exit 1
`;

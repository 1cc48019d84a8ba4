# The persistent shell's program; see shell-script.ts for the protocol.
exec 2>&1
# The command pipe, kept for `__openma_exit`: commands themselves run with stdin from /dev/null.
exec 63<&0
trap : USR1
# Whether SIGINT tells the command's own `&` jobs apart: not when this shell
# inherited it ignored (a launcher without env --default-signal).
__openma_sigint_ignored() {
  local line mask=
  { while read -r line; do [[ $line == SigIgn:* ]] && { mask=${line#SigIgn:}; break; }; done < "/proc/$1/status"; } 2>/dev/null || return 1
  mask=${mask//[[:space:]]/}
  [[ -n $mask ]] && (( 16#$mask & 2 ))
}
if __openma_sigint_ignored $$; then __openma_bg_by_sigint=; else __openma_bg_by_sigint=1; fi
# SIGKILLs the foreground command: the shell's ($1) descendants, except the
# subtrees of the pids after $1 (the watchdog, the jobs that existed before
# the command) and processes that ignore SIGINT (the command's own `&` jobs).
__openma_fg() {
  local root=$1 pass p rest line changed
  shift
  local -A parent tree skip
  for p in "$@"; do skip[$p]=1; done
  for pass in 1 2; do
    parent=() tree=([$root]=1)
    for p in /proc/[0-9]*; do
      p=${p#/proc/}
      { read -r line < "/proc/$p/stat"; } 2>/dev/null || continue
      rest=${line##*) }
      rest=${rest#* }
      parent[$p]=${rest%% *}
    done
    changed=1
    while ((changed)); do
      changed=0
      for p in "${!parent[@]}"; do
        if [[ -z ${tree[$p]-} && -z ${skip[$p]-} && -n ${tree[${parent[$p]}]-} ]]; then tree[$p]=1; changed=1; fi
      done
    done
    for p in "${!tree[@]}"; do
      [[ $p == "$root" ]] && continue
      [[ -n $__openma_bg_by_sigint ]] && __openma_sigint_ignored "$p" && continue
      kill -KILL "$p" 2>/dev/null
    done
  done
}
__openma_run() {
  trap '[[ ${FUNCNAME[0]-} == __openma_* && ${FUNCNAME[0]} != __openma_eval ]] || return 124' USR1
  __openma_eval "$1" </dev/null
}
__openma_eval() { eval "$1"; }
__openma_start() {
  local seconds=$1 nonce=$2
  shift 2
  __openma_nonce=$nonce
  ( trap - USR1; sleep "$seconds"; printf '\n__OPENMA_TIMEOUT_%s\n' "$nonce"; while :; do kill -USR1 $$; __openma_fg $$ $BASHPID "$@"; sleep 0.1; done ) </dev/null &
  __openma_w=$!
  disown $__openma_w
}
__openma_done() {
  trap : USR1
  kill -KILL $__openma_w 2>/dev/null
  __openma_nonce=
  printf '\n__OPENMA_END_%s %d\n' "$2" "$1"
}
# `exit` (or `set -e`) in a command: report its status, then replace this
# process with a fresh bash in place (same pid, cwd, exported variables and
# background processes); the caller sends this program again.
__openma_exit() {
  local rc=$?
  [[ -n ${__openma_nonce-} ]] || return
  kill -KILL "$__openma_w" 2>/dev/null
  printf '\n__OPENMA_END_%s %d exit\n' "$__openma_nonce" "$rc"
  exec /bin/bash --noprofile --norc <&63 63<&-
}
trap __openma_exit EXIT
printf '\n__OPENMA_READY\n'

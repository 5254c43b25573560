# Sourced by tests and benchmarks: starts a private OpenSSH server on
# 127.0.0.1 (its own keys and config under $1, a free port) and sets
#   ssh_cmd    a non-interactive ssh command line to it (as the current
#              user, connection sharing through a control socket)
#   sshd_pid   the server's pid (the caller kills it)
# Returns 77 (skip) when there is no sshd or no free port.
start_loopback_sshd() {
  local work=$1 sshd port candidate
  sshd=$(command -v sshd || echo /usr/sbin/sshd)
  [[ -x $sshd ]] || { echo "no sshd" >&2; return 77; }
  ssh-keygen -q -t ed25519 -N '' -f "$work/host_key"
  ssh-keygen -q -t ed25519 -N '' -f "$work/user_key"
  cp "$work/user_key.pub" "$work/authorized_keys"
  chmod 600 "$work/authorized_keys"
  [[ $(id -u) -ne 0 ]] || mkdir -p /run/sshd  # privilege separation directory
  port=
  for _ in $(seq 1 20); do
    candidate=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then port=$candidate; break; fi
  done
  [[ -n $port ]] || { echo "no free port" >&2; return 77; }
  cat > "$work/sshd_config" <<CONF
Port $port
ListenAddress 127.0.0.1
HostKey $work/host_key
PidFile $work/sshd.pid
AuthorizedKeysFile $work/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
LogLevel ERROR
CONF
  "$sshd" -f "$work/sshd_config" -D -e >/dev/null 2>"$work/sshd.log" &
  sshd_pid=$!
  ssh_cmd="ssh -T -F /dev/null -i $work/user_key -p $port -o BatchMode=yes \
-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
-o ControlMaster=auto -o ControlPath=$work/cm-%C -o ControlPersist=120 $(id -un)@127.0.0.1"
  for _ in $(seq 1 50); do
    $ssh_cmd true 2>/dev/null && break
    sleep 0.1
  done
  $ssh_cmd true || { cat "$work/sshd.log" >&2; return 1; }
}

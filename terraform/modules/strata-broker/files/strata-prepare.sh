#!/bin/bash
# strata-prepare: runs as root (strata-prepare.service) before every start of strata.service.
#
#   1. creates the strata system user
#   2. mounts the NVMe instance-store disks at $DATA_DIR/disk<i>, formatting them with XFS when
#      blank (first boot, and after every stop/start: EC2 hands back new, empty disks). Disks
#      are found by label, so disk<i> stays the same disk across reboots; in cluster mode also
#      creates $METADATA_DIR (the metadata quorum's log) on the root EBS volume, which keeps it
#      across a stop/start
#   3. installs the strata binary from $BINARY_URL (s3:// or https://) if the installed one does
#      not have SHA-256 $BINARY_SHA256, and refuses a download that does not match
#   4. writes /etc/strata/credentials.env (0600) from Secrets Manager or SSM Parameter Store
#      when the store needs static credentials (S3-compatible servers such as MinIO)
#   5. runs `strata config check` on /etc/strata/server.properties
#
# Settings come from /etc/strata/prepare.env, written by cloud-init from Terraform
# (terraform/modules/strata-broker). Every step is idempotent.
set -euo pipefail

: "${AWS_REGION:?}" "${BINARY_URL:?}" "${BINARY_SHA256:?}" "${DATA_DIR:?}" "${DISK_COUNT:?}"
: "${CREDENTIALS_SOURCE:?}"
export AWS_REGION

BIN=/usr/local/bin/strata
CONFIG=/etc/strata/server.properties
CREDENTIALS=/etc/strata/credentials.env

log() { echo "strata-prepare: $*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

# retry N CMD...: run CMD up to N times, 5 s apart (the network may still be coming up).
retry() {
  local n="$1" i
  shift
  for ((i = 1; ; i++)); do
    "$@" && return 0
    ((i < n)) || return 1
    log "attempt $i of $n failed: $*; retrying"
    sleep 5
  done
}

# ---------------------------------------------------------------------------------------- user
if ! id strata >/dev/null 2>&1; then
  useradd --system --home-dir "$DATA_DIR" --no-create-home --shell /sbin/nologin strata
fi

# ---------------------------------------------------------------------------------------- disks
mapfile -t disks < <(lsblk -dnpo NAME,MODEL | awk '/Amazon EC2 NVMe Instance Storage/ {print $1}' | sort -V)
((${#disks[@]} >= DISK_COUNT)) || die "found ${#disks[@]} instance-store disks, expected $DISK_COUNT"
mkdir -p "$DATA_DIR"
declare -A by_label=()
blank=()
for dev in "${disks[@]}"; do
  label="$(blkid -s LABEL -o value "$dev" || true)"
  if [[ "$label" =~ ^strata-d[0-9]+$ ]]; then
    by_label[$label]="$dev"
  else
    blank+=("$dev")
  fi
done
for ((i = 0; i < DISK_COUNT; i++)); do
  label="strata-d$i"
  mnt="$DATA_DIR/disk$i"
  mkdir -p "$mnt"
  if ! mountpoint -q "$mnt"; then
    dev="${by_label[$label]:-}"
    if [[ -z "$dev" ]]; then
      ((${#blank[@]} > 0)) || die "no blank instance-store disk left for $label"
      dev="${blank[0]}"
      blank=("${blank[@]:1}")
      log "formatting $dev as $label (blank instance store: first boot or after a stop/start)"
      mkfs.xfs -q -f -L "$label" "$dev"
    fi
    mount -o noatime "$dev" "$mnt"
  fi
  chown strata:strata "$mnt"
  chmod 0750 "$mnt"
done
if [[ -n "${METADATA_DIR:-}" ]]; then
  mkdir -p "$METADATA_DIR"
  chown strata:strata "$METADATA_DIR"
  chmod 0750 "$METADATA_DIR"
fi

# ---------------------------------------------------------------------------------------- binary
installed=""
if [[ -x "$BIN" ]]; then
  installed="$(sha256sum "$BIN" | cut -d' ' -f1)"
fi
if [[ "$installed" != "$BINARY_SHA256" ]]; then
  tmp="$(mktemp /usr/local/bin/.strata.XXXXXX)"
  trap 'rm -f "$tmp"' EXIT
  case "$BINARY_URL" in
    s3://*) retry 5 aws s3 cp --only-show-errors "$BINARY_URL" "$tmp" ;;
    https://*) retry 5 curl --fail --silent --show-error --location --proto '=https' -o "$tmp" "$BINARY_URL" ;;
    *) die "BINARY_URL must be s3:// or https://, got $BINARY_URL" ;;
  esac
  echo "$BINARY_SHA256  $tmp" | sha256sum --check --quiet \
    || die "$BINARY_URL does not have SHA-256 $BINARY_SHA256"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$BIN"
  trap - EXIT
  log "installed strata $("$BIN" --version 2>/dev/null || true) from $BINARY_URL"
fi

# ---------------------------------------------------------------------------------------- credentials
# The values go from the AWS CLI to python on stdin, never on a command line.
write_credentials() {
  local tmp
  tmp="$(mktemp /etc/strata/.credentials.XXXXXX)" # mode 0600
  if ! python3 -c '
import json, sys
source, wanted = sys.argv[1], sys.argv[2:]
doc = json.load(sys.stdin)
if source == "secretsmanager":
    secret = json.loads(doc["SecretString"])
    key_id, secret_key = secret["access_key_id"], secret["secret_access_key"]
else:
    if doc.get("InvalidParameters"):
        sys.exit("unknown SSM parameters: %s" % doc["InvalidParameters"])
    value = {}
    for p in doc["Parameters"]:
        value[p["Name"]] = value[p["ARN"]] = p["Value"]
    key_id, secret_key = (value[w] for w in wanted)
def quoted(v):  # systemd EnvironmentFile syntax
    return "\"" + v.replace("\\", "\\\\").replace("\"", "\\\"") + "\""
print("STRATA_REMOTE_STORE_ACCESS_KEY_ID=" + quoted(key_id))
print("STRATA_REMOTE_STORE_SECRET_ACCESS_KEY=" + quoted(secret_key))
' "$@" >"$tmp"; then
    rm -f "$tmp"
    die "could not read the store credentials ($CREDENTIALS_SOURCE)"
  fi
  mv -f "$tmp" "$CREDENTIALS"
}
case "$CREDENTIALS_SOURCE" in
  none) rm -f "$CREDENTIALS" ;;
  secretsmanager)
    : "${SECRET_ID:?}"
    retry 5 aws secretsmanager get-secret-value --secret-id "$SECRET_ID" --output json \
      | write_credentials secretsmanager
    ;;
  ssm)
    : "${SSM_ACCESS_KEY_ID_PARAMETER:?}" "${SSM_SECRET_ACCESS_KEY_PARAMETER:?}"
    retry 5 aws ssm get-parameters --with-decryption --output json \
      --names "$SSM_ACCESS_KEY_ID_PARAMETER" "$SSM_SECRET_ACCESS_KEY_PARAMETER" \
      | write_credentials ssm "$SSM_ACCESS_KEY_ID_PARAMETER" "$SSM_SECRET_ACCESS_KEY_PARAMETER"
    ;;
  *) die "CREDENTIALS_SOURCE must be none, secretsmanager or ssm, got $CREDENTIALS_SOURCE" ;;
esac

# ---------------------------------------------------------------------------------------- config
"$BIN" config check "$CONFIG" || die "$CONFIG is not a valid Strata configuration"

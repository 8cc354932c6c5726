#!/usr/bin/env bash
# Checks for terraform/ (run by scripts/test-all.sh; a few seconds plus ~10 s of checkov):
#
#   1. terraform fmt -check -recursive terraform/     (skipped, with a notice, without terraform)
#   2. checkov (its own venv, $STRATA_CACHE/checkov-venv, from scripts/install-test-deps.sh):
#      no failed checks, no parsing errors, and a non-zero number of resources parsed (checkov
#      exits 0 on HCL it cannot parse). Skips are inline #checkov:skip comments with a reason.
#   3. the broker config template that cloud-init writes
#      (terraform/modules/strata-broker/templates/server.properties.tftpl) rendered with each
#      terraform/tests/server-properties.*.json and checked with `strata config check`, which
#      must accept it without warning about unknown settings; the sample variables must be the
#      ones the module passes, and the samples must cover both cluster mode and single nodes;
#      with terraform present the Python renderer's output must equal templatefile()'s
#      (terraform console, offline, no init) and the cloud-init user data must carry exactly
#      that file and stay under EC2's 16 KiB limit. Negative tests: a misspelt strata.* key and
#      misspelt Kafka keys (one of them a cluster-mode key) in the template must all fail.
#   4. shellcheck on the instance's prepare script (skipped without shellcheck).
#
# terraform init/validate/plan are not run: they need the provider registry, which these
# machines cannot reach (see terraform/README.md).
#
# Environment: STRATA_BIN (default $CARGO_TARGET_DIR/debug/strata, CARGO_TARGET_DIR defaulting
# to $STRATA_CACHE/target as in test-all.sh), STRATA_CACHE.
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$STRATA_REPO_ROOT"

TF=terraform
MODULE="$TF/modules/strata-broker"
TEMPLATE="$MODULE/templates/server.properties.tftpl"
RENDER="$TF/tests/render_template.py"
STRATA_BIN="${STRATA_BIN:-${CARGO_TARGET_DIR:-$STRATA_CACHE/target}/debug/strata}"
CHECKOV_VENV="$STRATA_CACHE/checkov-venv"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

have_terraform=0
if command -v terraform >/dev/null; then
  have_terraform=1
fi
# Offline and quiet: no version checkpoint calls, no CLI-config warnings.
export CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1
tf_rc="${TF_CLI_CONFIG_FILE:-${HOME:-/root}/.terraformrc}"
if [[ ! -e "$tf_rc" ]]; then
  export TF_CLI_CONFIG_FILE=/dev/null
fi

# ------------------------------------------------------------------------------ 1. fmt
if ((have_terraform)); then
  strata_log "terraform fmt -check -recursive $TF/ ($(terraform version | head -1))"
  terraform fmt -check -recursive -diff "$TF/" || strata_die "terraform fmt: run 'terraform fmt -recursive $TF/'"
else
  strata_log "terraform not found: skipping fmt and the templatefile() cross-check"
fi

# ------------------------------------------------------------------------------ 2. checkov
[[ -x "$CHECKOV_VENV/bin/checkov" ]] || strata_die "checkov missing: run scripts/install-test-deps.sh"
strata_log "checkov $("$CHECKOV_VENV/bin/checkov" --version) on $TF/"
"$CHECKOV_VENV/bin/checkov" --skip-download --framework terraform -d "$TF/" --quiet -o json \
  >"$work/checkov.json" 2>"$work/checkov.err" || true
python3 - "$work/checkov.json" "$work/checkov.err" <<'PY' || strata_die "checkov failed"
import json, sys
try:
    with open(sys.argv[1]) as f:
        report = json.load(f)
except ValueError:
    sys.stderr.write(open(sys.argv[2]).read())
    sys.exit("checkov printed no JSON report")
if isinstance(report, list):  # one report per framework; we ask for terraform only
    report = next((r for r in report if r.get("check_type") == "terraform"), {})
summary = report.get("summary", {})
failed = report.get("results", {}).get("failed_checks", [])
for c in failed:
    lines = c.get("file_line_range", ["?", "?"])
    print(f"  FAILED {c['check_id']} {c['resource']} ({c['file_path']}:{lines[0]}-{lines[1]}): {c['check_name']}",
          file=sys.stderr)
print(f"  checkov: {summary.get('resource_count', 0)} resources, {summary.get('passed', 0)} passed, "
      f"{summary.get('failed', 0)} failed, {summary.get('skipped', 0)} skipped, "
      f"{summary.get('parsing_errors', 0)} parsing errors", file=sys.stderr)
if summary.get("parsing_errors", 0) or summary.get("resource_count", 0) == 0:
    sys.exit("checkov parsed nothing (or hit parsing errors): it does not fail on HCL it cannot read")
if failed or summary.get("failed", 0):
    sys.exit(1)
PY

# ------------------------------------------------------------------------------ 3. rendered config
[[ -x "$STRATA_BIN" ]] || strata_die "$STRATA_BIN not found: build it with 'cargo build --bin strata'"

# check_config FILE: `strata config check` must accept FILE without warnings about unknown
# settings (Kafka keys Strata does not know are only warned about, so a misspelt Kafka key
# would otherwise pass). Runs without the caller's STRATA_* variables.
check_config() {
  local out rc=0
  out="$(env -i PATH="$PATH" HOME="${HOME:-/root}" NO_COLOR=1 STRATA_LOG=warn \
    "$STRATA_BIN" config check "$1" 2>&1)" || rc=$?
  if ((rc != 0)); then
    printf '%s\n' "$out" >&2
    return 1
  fi
  if grep -q 'unknown setting' <<<"$out"; then
    printf '%s\n' "$out" >&2
    return 1
  fi
}

# The sample variables must be exactly the ones main.tf passes to templatefile().
python3 - "$MODULE/main.tf" "$TF"/tests/server-properties.*.json <<'PY' || strata_die "sample variables drifted from the module"
import json, re, sys
text = open(sys.argv[1]).read()
m = re.search(r'templatefile\("\$\{path\.module\}/templates/server\.properties\.tftpl", \{\n(.*?)\n\s*\}\)', text, re.S)
if not m:
    sys.exit(f"{sys.argv[1]}: cannot find the templatefile() call for server.properties.tftpl")
module_keys = set(re.findall(r"^\s*([a-z_]+)\s*=", m.group(1), re.M))
modes = set()
for path in sys.argv[2:]:
    sample = json.load(open(path))
    keys = set(sample)
    if keys != module_keys:
        sys.exit(f"{path}: keys differ from the module's templatefile() call: "
                 f"missing {sorted(module_keys - keys)}, extra {sorted(keys - module_keys)}")
    modes.add(sample.get("cluster_mode"))
if modes != {True, False}:
    sys.exit("the samples must include a cluster_mode = true and a cluster_mode = false one")
PY

# tf_render TEMPLATE VARS.json OUT: templatefile() through `terraform console` (no init needed
# in a directory without configuration).
tf_render() {
  local dir="$work/console"
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$1" "$dir/template.tftpl"
  cp "$2" "$dir/vars.json"
  (cd "$dir" && echo 'base64encode(templatefile("template.tftpl", jsondecode(file("vars.json"))))' \
    | terraform console) >"$dir/out" 2>"$dir/err" || {
    cat "$dir/err" >&2
    return 1
  }
  tr -d '"\n' <"$dir/out" | base64 -d >"$3"
}

samples=("$TF"/tests/server-properties.*.json)
((${#samples[@]} > 0)) || strata_die "no sample variables in $TF/tests"
for vars in "${samples[@]}"; do
  name="$(basename "$vars" .json)"
  out="$work/$name.properties"
  python3 "$RENDER" "$TEMPLATE" "$vars" "$out" || strata_die "cannot render $TEMPLATE with $vars"
  if ((have_terraform)); then
    tf_render "$TEMPLATE" "$vars" "$work/$name.tf.properties" || strata_die "terraform console could not render $TEMPLATE"
    diff -u "$work/$name.tf.properties" "$out" >&2 \
      || strata_die "render_template.py and templatefile() disagree on $TEMPLATE with $vars"
  fi
  check_config "$out" || strata_die "$TEMPLATE rendered with $vars is not a valid Strata config"
  strata_log "$TEMPLATE with $(basename "$vars"): strata config check OK"
done

# The cloud-init user data carries exactly the checked file, and fits in 16 KiB (the cluster
# sample's config is the largest).
if ((have_terraform)); then
  printf 'AWS_REGION=eu-west-1\nBINARY_URL=s3://b/strata\n' >"$work/prepare.env"
  for vars in "${samples[@]}"; do
    props="$work/$(basename "$vars" .json).properties"
    python3 - "$work/cloud-init.json" "$props" "$work/prepare.env" "$MODULE/files" <<'PY'
import json, sys
out, props, env, files = sys.argv[1:]
read = lambda p: open(p).read()
json.dump({"node_id": 2, "server_properties": read(props), "prepare_env": read(env),
           "prepare_script": read(f"{files}/strata-prepare.sh"),
           "prepare_unit": read(f"{files}/strata-prepare.service"),
           "strata_unit": read(f"{files}/strata.service")}, open(out, "w"))
PY
    tf_render "$MODULE/templates/cloud-init.yaml.tftpl" "$work/cloud-init.json" "$work/user-data" \
      || strata_die "terraform console could not render the cloud-init template"
    python3 - "$work/user-data" "$props" <<'PY' || strata_die "cloud-init user data check failed with $vars"
import base64, re, sys
data = open(sys.argv[1], "rb").read()
props = open(sys.argv[2], "rb").read()
if not data.startswith(b"#cloud-config\n"):
    sys.exit("user data does not start with #cloud-config")
if len(data) > 16384:
    sys.exit(f"user data is {len(data)} bytes; EC2 allows 16384")
# write_files entries: path, permissions, encoding: b64, content (see cloud-init.yaml.tftpl).
files = dict(re.findall(r"- path: (\S+)\n(?:\s+\w+: .*\n)*?\s+content: (\S+)\n", data.decode()))
if base64.b64decode(files.get("/etc/strata/server.properties", "")) != props:
    sys.exit("cloud-init does not write the checked server.properties")
print(f"  user data with {sys.argv[2].rsplit('/', 1)[-1]}: {len(data)} bytes, {len(files)} files",
      file=sys.stderr)
PY
  done
  strata_log "cloud-init user data writes the checked config and fits in 16 KiB"
fi

# Credentials reach Strata as environment variables; they must map to settings it knows
# (STRATA_A_B -> strata.a.b). A properties file with the mapped keys must pass the check.
grep -ohE 'STRATA_REMOTE_STORE_[A-Z_]+' "$MODULE/files/strata-prepare.sh" | sort -u \
  | while read -r var; do
    printf 'strata.%s=x\n' "$(tr 'A-Z_' 'a-z.' <<<"${var#STRATA_}")"
  done >"$work/credentials.properties"
[[ -s "$work/credentials.properties" ]] || strata_die "no credential variables found in strata-prepare.sh"
check_config "$work/credentials.properties" \
  || strata_die "strata-prepare.sh writes credential variables Strata does not know"

# Negative tests: a misspelt key must fail the check, whether Strata refuses it (strata.*) or
# would only warn (a Kafka name). Rendered with a cluster-mode sample, which has every key.
cluster_sample="$(grep -l '"cluster_mode": true' "${samples[@]}" | head -1)"
for typo in 's/^strata\.remote\.store\.url=/strata.remote.store.ulr=/' 's/^broker\.rack=/broker.rak=/' \
  's/^controller\.quorum\.voters=/controller.quorum.voter=/'; do
  sed "$typo" "$TEMPLATE" >"$work/broken.tftpl"
  cmp -s "$TEMPLATE" "$work/broken.tftpl" && strata_die "negative test: '$typo' changed nothing"
  python3 "$RENDER" "$work/broken.tftpl" "$cluster_sample" "$work/broken.properties"
  if check_config "$work/broken.properties" 2>/dev/null; then
    strata_die "negative test: the template with '$typo' passed the check"
  fi
done
strata_log "negative tests: misspelt keys fail the check"

# ------------------------------------------------------------------------------ 4. shellcheck
if command -v shellcheck >/dev/null; then
  shellcheck "$MODULE/files/strata-prepare.sh"
  strata_log "shellcheck strata-prepare.sh OK"
else
  bash -n "$MODULE/files/strata-prepare.sh"
  strata_log "shellcheck not found: only bash -n on strata-prepare.sh"
fi

strata_log "terraform checks passed"

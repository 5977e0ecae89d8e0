#!/usr/bin/env bash
# Prints the path of the first Python >= 3.12 that actually runs:
# $PYTHON if set, then python3.12 / python3.13 on PATH, then pyenv's installed versions.
set -u
ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }
if [ -n "${PYTHON:-}" ]; then
  if ok "$PYTHON"; then command -v "$PYTHON" || echo "$PYTHON"; exit 0; fi
  echo "find_python: \$PYTHON=$PYTHON is not a working Python >= 3.12" >&2; exit 1
fi
for cand in python3.12 python3.13 python3; do
  if command -v "$cand" >/dev/null 2>&1 && ok "$cand"; then
    "$cand" -c 'import sys; print(sys.executable)'; exit 0
  fi
done
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root)
  for dir in $(ls -d "$root"/versions/3.1[2-9]* 2>/dev/null | sort -V); do
    if ok "$dir/bin/python"; then echo "$dir/bin/python"; exit 0; fi
  done
fi
echo "find_python: no Python >= 3.12 found (tried \$PYTHON, python3.12, python3.13, python3, pyenv versions)." >&2
echo "find_python: install Python 3.12+ or set PYTHON=/path/to/python3.12" >&2
exit 1

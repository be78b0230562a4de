# Sourced by the checks that build an environment on another Python than python3: which CPython 3 versions this
# machine offers (python3.X on PATH, pyenv's versions), and the oldest one pyproject's requires-python allows.
# pythons: "3.X path" for every CPython 3 this machine offers
pythons() {
  local candidate version
  for candidate in $(compgen -c python3. | grep -E '^python3\.[0-9]+$' | sort -u) \
      $(command -v pyenv >/dev/null 2>&1 && pyenv versions --bare 2>/dev/null | grep -E '^3\.[0-9]+\.[0-9]+$' \
        | sed "s|^|$(pyenv root)/versions/|; s|\$|/bin/python|"); do
    version="$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
    if [ -n "$version" ]; then echo "$version $candidate"; fi
  done
}
# python_floor: the oldest Python requires-python allows ("3.10"), read from pyproject.toml
python_floor() { sed -n 's/^requires-python *= *">= *\([0-9]*\.[0-9]*\)".*/\1/p' pyproject.toml; }
# oldest_python: the path of a Python at that floor, empty when this machine has none
oldest_python() { pythons | awk -v want="$(python_floor)" '$1 == want { print $2; exit }'; }
# newest_python: the path of the newest Python this machine offers
newest_python() { pythons | sort -V | tail -1 | cut -d' ' -f2-; }

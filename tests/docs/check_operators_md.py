"""Fails when docs/operators.md's op table no longer matches the code (ops.def, the kernel
registries) and the installed onnx schemas. Regenerate with tools/docs/gen_operators_md.py."""
import subprocess
import sys

build, doc, generator = sys.argv[1], sys.argv[2], sys.argv[3]
fresh = subprocess.run([sys.executable, generator, build], check=True, capture_output=True, text=True).stdout
committed = open(doc).read().split("\n## Known conformance failures")[0]
if fresh.strip() != committed.strip():
    fresh_lines, old_lines = fresh.strip().splitlines(), committed.strip().splitlines()
    changed = [line for line in fresh_lines if line not in old_lines][:10]
    print("docs/operators.md is out of date; regenerate it (see README). New or changed lines:")
    print("\n".join(changed) or "(lines removed)")
    sys.exit(1)
print("docs/operators.md matches the op table")

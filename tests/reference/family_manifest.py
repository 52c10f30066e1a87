"""DIR/manifest.json of the family reference scripts (decoder_family_reference.py,
encoder_family_reference.py): each "build" runs in one reference environment
(transformers 4.36 or 4.48) and adds its families' cases to the same file."""
import json
import os


def open_manifest(workdir, families, **fields):
    """The manifest in workdir, or a new one of `fields` with no cases; each of
    `families` recorded as built by this environment's transformers."""
    import transformers
    path = os.path.join(workdir, "manifest.json")
    manifest = {"cases": [], "transformers": {}, **fields}
    if os.path.exists(path):
        with open(path) as f:
            manifest = json.load(f)
    for family in families:
        manifest["transformers"][family] = transformers.__version__
    return manifest


def save_manifest(workdir, manifest):
    with open(os.path.join(workdir, "manifest.json"), "w") as f:
        json.dump(manifest, f)

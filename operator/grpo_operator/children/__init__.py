"""Pure builders of a run's child objects: plain dicts, ready for the API, with labels and the
controller ownerReference set in one place (``meta.child_metadata``)."""

"""The systemd boundary: everything that talks to the systemd manager.

- ``sdbus``: the cffi sd-bus binding (the hot path); ``rare``: the pystemd calls (listing
  units, reading all properties); ``connect``: opening the connection;
- ``bridge``: the calls and signals on top of them; ``unitsignals``: which unit a signal is
  for; ``bus``: the connection's fd watcher (pump, reconnect); ``port``: the five parts the
  service hands on together;
- ``calls``: starts and kills whose replies were lost, settled; ``sweeper``: units whose
  stop did not go through, stopped until systemd lets go;
- ``holds``: the D-Bus references that keep waitable units loaded; ``keepers``: the slices
  that keep units loaded through a bus loss;
- ``guard``: the guard unit a handing-over unload starts; ``teardown``: the blocking stops
  of an unload.
"""

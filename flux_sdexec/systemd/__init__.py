"""The systemd boundary: everything that talks to the systemd manager.

``sdbus*`` the cffi sd-bus binding (hot path), ``rare`` the pystemd calls (listing units,
reading all properties), ``connect`` opening the connection, ``bridge`` the calls and signals
on top of them, ``bus`` the connection's fd watcher (pump, reconnect), ``guard`` the guard
unit a handing-over unload starts, ``teardown`` the blocking stops of an unload.
"""

"""What we know about one transient unit, built from PropertiesChanged signals.

Owns the rules of sdexec-protocol.md §5.3-5.4: which property values are
latched, when the process counts as started, finished or unable to execute,
and its wait status. Pure: stdlib only.
"""

ACTIVE_STATES = frozenset(
    ("activating", "active", "deactivating", "inactive", "failed", "reloading")
)
# the PropertiesChanged properties Unit.update() reads
TRACKED = ("ActiveState", "SubState", "ExecMainPID", "ExecMainCode", "ExecMainStatus", "Result")
EXEC_FAILURE_STATUSES = range(200, 244)  # systemd's EXIT_* codes (203 = EXIT_EXEC)
CLD_EXITED, CLD_KILLED = 1, 2  # ExecMainCode; CLD_DUMPED (3) is reported like an exit


def lost_signals(pid):
    """What a unit its manager no longer has (the manager restarted) is taken to have said:
    failed, its main process ``pid`` killed (SIGKILL, status 9), then gone, so that its exec
    ends (a list of PropertiesChanged property sets)."""
    failed = {
        "ActiveState": "failed",
        "SubState": "failed",
        "Result": "signal",
        "ExecMainPID": pid,
        "ExecMainCode": CLD_KILLED,
        "ExecMainStatus": 9,
    }
    return [failed, {"ActiveState": "inactive", "SubState": "dead"}]


def forget_call(active_state, queued=False):
    """The one policy for making systemd forget a loaded unit: the call due in ``active_state``.

    A failed unit stays loaded until ResetFailedUnit. An active (or activating) one must
    be stopped first, and may then end failed and need the reset; a deactivating one is on
    its way. An inactive one is gone, unless its start job may still be ``queued`` (it has
    not run since its start was taken): StopUnit in mode "replace" cancels that job, where
    nothing sent would let it run later. Returns "reset-failed", "stop" or None.
    """
    if active_state == "failed":
        return "reset-failed"
    if active_state in ("active", "activating", "reloading") or queued:
        return "stop"
    return None


class Unit:
    """What systemd last said about one unit (the design's struct unit).

    Facts are latched; booleans are computed, never stored.
    """

    __slots__ = (
        "name",
        "active_state",
        "sub_state",
        "pid",
        "code",
        "status",
        "result",
        "left_inactive",
        "was_active",
        "activity_unknown",
        "started_at",
    )

    def __init__(self, name):
        self.name = name  # the unit name, <label>:<instance>.service
        self.active_state = "unknown"
        self.sub_state = "unknown"
        self.pid = None
        self.code = None
        self.status = None
        self.result = None
        self.left_inactive = False  # systemd's first signal shows inactive/dead, before the start
        self.was_active = False  # it was active (Type=notify: READY=1 came), latched
        # signals were lost (a reconnect, an adoption) and no read said whether it was active
        self.activity_unknown = False
        # when its start was sent (epoch s), or systemd's ExecMainStartTimestamp once adopted
        self.started_at = None

    def copy(self):
        c = Unit.__new__(Unit)  # once per signal: spelled out, no loop over __slots__
        c.name, c.active_state, c.sub_state = self.name, self.active_state, self.sub_state
        c.pid, c.code, c.status, c.result = self.pid, self.code, self.status, self.result
        c.left_inactive, c.was_active = self.left_inactive, self.was_active
        c.activity_unknown, c.started_at = self.activity_unknown, self.started_at
        return c

    def update(self, props, reread=False):
        """Merge one signal's properties; return True if anything we track changed.

        ``reread``: ``props`` is a read of the unit (GetAll) after signals may have been
        lost (a reconnect's catch-up, an adoption). Whether the unit was ever active then
        comes from systemd's own record, ActiveEnterTimestamp (0 until the unit first
        enters active; READY=1 for Type=notify): set, it was; 0, it never was; absent, or
        the read of a unit systemd forgot, unknown (``activity_unknown``) until a read
        says. LoadState "not-found" (a GetAll answer, never a signal) says systemd has
        forgotten a unit whose start it took: it ran and is gone (the adapters read it
        only then).
        """
        u = self
        before = (u.active_state, u.sub_state, u.pid, u.code, u.result, u.left_inactive)
        before += (u.was_active, u.activity_unknown)
        if reread:
            entered = props.get("ActiveEnterTimestamp")
            forgotten = props.get("LoadState") == "not-found"  # a stub's timestamps
            if entered is None or forgotten:
                self.activity_unknown = True
            else:
                self.was_active |= entered > 0
                self.activity_unknown = False  # systemd's record covers the gap
        state = props.get("ActiveState")
        if state is not None:
            self.active_state = state if state in ACTIVE_STATES else "unknown"
            self.left_inactive |= self.active_state not in ("inactive", "unknown")
            self.was_active |= self.active_state == "active"
        if "SubState" in props:
            self.sub_state = props["SubState"]
        if props.get("LoadState") == "not-found":
            self.active_state, self.sub_state, self.left_inactive = "inactive", "dead", True
        pid = props.get("ExecMainPID")
        if self.pid is None and pid:
            self.pid = pid
        # ExecMainCode/Status first appear as 0/0: latch only a real, complete pair
        code, status = props.get("ExecMainCode"), props.get("ExecMainStatus")
        if self.code is None and code and status is not None:
            self.code, self.status = code, status
        if self.result is None and props.get("Result", "success") != "success":
            self.result = props["Result"]
        after = (u.active_state, u.sub_state, u.pid, u.code, u.result, u.left_inactive)
        return before != after + (u.was_active, u.activity_unknown)

    def found_at_load(self, props):
        """Take a unit found at load (one GetAll, a consistent snapshot): inactive with an
        exit status, it ran and ended while no sdexec watched it (kept loaded by the
        predecessor's guard: an IMP's unit ends inactive, not "exited")."""
        ended = props.get("ActiveState") == "inactive" and props.get("ExecMainCode")
        self.left_inactive |= bool(ended)

    @property
    def never_active(self):
        """systemd's word that the unit never became active (for Type=notify: its main
        process never sent READY=1): every signal since the start was seen without
        "active", or a read after a gap said so. False when unknown."""
        return not self.was_active and not self.activity_unknown

    @property
    def state(self):
        """``<ActiveState>.<SubState>`` as flux-core's stats show it."""
        return f"{self.active_state}.{self.sub_state}"

    @property
    def exec_failed(self):
        """The process could not be executed (ExecMainStatus 200-243)."""
        return self.code == CLD_EXITED and self.status in EXEC_FAILURE_STATUSES

    @property
    def finished(self):
        """The process ran and its exit status is known."""
        return self.code is not None and not self.exec_failed

    @property
    def started(self):
        """A pid is known and the process reached running, or already finished.

        systemd coalesces quick transitions, so a short process may never be
        seen ``running``; its known exit status then stands for the start.
        """
        return self.pid is not None and (self.sub_state == "running" or self.finished)

    @property
    def wait_status(self):
        """The wait(2)-style status flux clients decode (core dumps as flux-core: sig<<8)."""
        if self.signaled:
            return self.status
        return self.status << 8

    @property
    def signaled(self):
        """The process was killed by a signal (ExecMainStatus is the signal number)."""
        return self.code == CLD_KILLED

    @property
    def gone(self):
        """systemd has run and stopped the unit: inactive again after leaving inactive."""
        return self.active_state == "inactive" and self.left_inactive

    @property
    def stopping(self):
        """systemd is stopping the unit (deactivating): a stop is under way already."""
        return self.active_state == "deactivating"

"""A small LRU cache of fai plans. Every layer of one forward pass attends over the same shapes, so
the first layer plans and the others reuse its plan; a decode step, whose key length grows by one,
makes one new plan and evicts the oldest."""
import collections
import threading


class PlanCache:
    """Plans by key (the shapes, dtypes and options that a plan fixes), the `capacity` most
    recently used kept. `created` and `reused` count misses and hits: what a test reads to see
    that one forward pass plans once."""

    def __init__(self, capacity=8):
        self.capacity = capacity
        self.created = 0
        self.reused = 0
        self._plans = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, make):
        """The plan for key, made by make() when it is not cached."""
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                self.reused += 1
                return plan
        plan = make()  # outside the lock: planning may take milliseconds for long prompts
        with self._lock:
            self.created += 1
            self._plans[key] = plan
            self._plans.move_to_end(key)
            while len(self._plans) > self.capacity:
                # dropped, not closed: a thread may still be running it (freed with the object)
                self._plans.popitem(last=False)
        return plan

    def clear(self):
        """Forgets every cached plan (each is freed with its last reference) and resets the
        counts."""
        with self._lock:
            self._plans.clear()
            self.created = 0
            self.reused = 0

    def __len__(self):
        return len(self._plans)

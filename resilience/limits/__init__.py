"""Per-tenant cost limits and weighted fair queueing in front of a shared backend.

Costs are counted in *cost units*: an admitted request costs ``input_weight × input_units +
output_weight × output_units`` (for a text model: prompt and generated tokens, output weighed
more because it is what occupies the backend longest). Nothing here knows what a unit is.

Three isolation levels, cheapest first:

1. **Shared with limits** (``TenantLimiter``): one pool for every tenant; each tenant has a token
   bucket (a rate in cost units per second and a burst). A request reserves its worst case
   (input plus the most output it may produce) at admission and settles at finish: the unused
   part of the reservation is refunded, so a tenant is charged for what it used, never more
   than it reserved, and can never exceed its rate beyond its burst over any window. It bounds
   each tenant's take but not the latency one tenant's burst inflicts on the others.
2. **Fair share** (``FairQueue``): admitted requests wait in a weighted fair queue (virtual
   finish times, start-time fair queueing); under backlog each tenant's share of the served cost
   converges to its weight over the sum of the backlogged tenants' weights, and an idle tenant's
   share goes to the busy ones. A heavy tenant queues behind itself, not in front of others.
3. **Dedicated**: the tenant gets its own replicas (its own queue and capacity). Full isolation
   of latency and failure, at the cost of capacity that idles when the tenant does; this module
   has nothing to do for it beyond routing, which is the caller's.
"""

from fleetwatch.resilience.limits.bucket import CostWeights, Reservation, TenantLimiter, TokenBucket
from fleetwatch.resilience.limits.fair import FairQueue

__all__ = ["CostWeights", "FairQueue", "Reservation", "TenantLimiter", "TokenBucket"]

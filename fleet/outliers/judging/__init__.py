"""Judging a fleet table: one pass over its replicas, the causes (the replica or its traffic) and the context an on-call reads beside a finding."""

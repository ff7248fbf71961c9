"""The statistics of one replica against its fleet: robust z-scores with stated cutoffs, the null tables of the largest deviation, rank tests on requests, count tests on shares."""

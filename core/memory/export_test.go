package memory

// QuotaLinger is how long a quota's state outlives its period.
const QuotaLinger = quotaLinger

"""The bad values of every ``spark.flow.*`` key and what each message says is allowed: one
table for the tests that feed them to the parsers (pure) and to a producer's batch (session)."""

WHOLE = "a whole number >= 0"
SIZE = "bytes as a whole number >= 0, or with a unit: 8k, 10 MB"
PERCENT = "a percentage from 0 to 100"
DURATION = "a duration such as 500ms, 5s, 2min, 1h (a plain number is milliseconds)"
POLICIES = "one of flow, ring, ring-strict"
ON_FULL = "one of hold, reject, reject-after"

CONF_VALUES = [
    ("stopCount", "abc", WHOLE), ("stopCount", "-5", WHOLE), ("stopCount", "1.5", WHOLE),
    ("resumeCount", "x", WHOLE), ("maxCount", "ten", WHOLE),
    ("stopSize", "10 parsecs", SIZE), ("stopSize", "0.3b", "a whole number of bytes"), ("resumeSize", "lots", SIZE),
    ("maxSize", "-1k", SIZE),
    ("defaultStopThreshold", "101", PERCENT), ("defaultResumeThreshold", "-1", PERCENT),
    ("policy", "drop-newest", POLICIES), ("onFull", "wait", ON_FULL), ("rejectTimeout", "soon", DURATION),
    ("capacity", "0", "a whole number >= 1"), ("pollInterval", "0s", DURATION + ", above 0"),
    ("producerFlowControl", "maybe", "true or false"), ("producersStopped", "sometimes", "true or false"),
    ("pacing", "often", "true or false"),
    ("stallTimeout", "forever", DURATION), ("stalledConsumerPolicy", "ignore", "one of flag, skip"),
    ("stopAge", "-5s", DURATION), ("resumeAge", "a while", DURATION),
    ("homeStopCount", "-1", WHOLE), ("homeResumeCount", "many", WHOLE), ("homeStopSize", "big", SIZE),
    ("homeResumeSize", "-1k", SIZE), ("msgPublishRate", "fast", WHOLE), ("bytePublishRate", "1 parsec/s", SIZE),
    ("messageTtl", "soon", DURATION), ("maxDeliveries", "-1", WHOLE),
    ("deadLetterQueue", " ", "a queue: a path or a catalog table name"), ("maxDeadLettersPerBatch", "0", "a whole number >= 1"),
    ("pacingWeight", "0", "a whole number >= 1"),
    ("io", "jdbc", "one of auto, deltalake, engine"),
]

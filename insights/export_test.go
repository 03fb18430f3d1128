package insights

// Test clocks, kept out of the public API.
var WithClock = withClock

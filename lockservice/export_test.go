package lockservice

// EngineKey is engineKey, for the tests of the key encoding.
var EngineKey = engineKey

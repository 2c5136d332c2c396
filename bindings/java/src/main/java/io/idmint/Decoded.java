package io.idmint;

import java.time.Instant;

/**
 * An ID taken apart by {@link Layout#decode}.
 *
 * @param id the ID
 * @param time the start of its tick
 * @param tick time units since the layout's epoch
 * @param datacenter the datacenter part of the node field
 * @param worker the worker part of the node field
 * @param rollback the rollback counter (layouts with rollback bits)
 * @param sequence the sequence within the tick
 */
public record Decoded(long id, Instant time, long tick, int datacenter, int worker, int rollback, int sequence) {}

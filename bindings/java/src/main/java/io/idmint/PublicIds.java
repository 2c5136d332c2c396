package io.idmint;

import java.lang.ref.Reference;
import java.nio.file.Path;
import java.util.Objects;

/**
 * Keyed, reversible obfuscation of IDs for the public, and its text forms
 * ({@code dec}, {@code base32}, {@code sqids}), with the settings of the
 * config's {@code [obfuscation]} section.
 *
 * <p>Public IDs are {@code bits} wide (63 by default, so they fit a signed
 * {@code long}). With {@code bits(64)} they fill the {@code long}: read them as
 * unsigned ({@link Long#toUnsignedString(long)}). Immutable and thread-safe.
 */
public final class PublicIds {
    private final NativeRef ref;

    private PublicIds(long handle) {
        this.ref = NativeRef.own(this, handle, null, Native::publicIdsFree);
    }

    /**
     * A builder for the key ring {@code key}: one key in hex, or
     * {@code "0:<hex> 1:<hex>"} for a ring with key IDs.
     */
    public static Builder builder(String key) {
        return new Builder(Objects.requireNonNull(key, "key"));
    }

    /**
     * From the {@code [obfuscation]} section of the config at {@code config} (and
     * {@code IDMINT_OBFUSCATION_KEY}).
     *
     * @throws IdmintException {@code invalid_config} naming the setting (never
     *     quoting a key)
     */
    public static PublicIds fromConfig(Path config) {
        return new PublicIds(Native.publicIdsFromConfig(Objects.requireNonNull(config, "config").toString()));
    }

    /** The public ID of {@code id}. @throws IdmintException {@code invalid_id} */
    public long obfuscate(long id) {
        try {
            return Native.publicIdsObfuscate(ref.handle, id);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** The ID behind a public ID. @throws IdmintException {@code invalid_public_id}, {@code unknown_key_id} */
    public long reveal(long publicId) {
        try {
            return Native.publicIdsReveal(ref.handle, publicId);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** A public ID in the text form. */
    public String encode(long publicId) {
        try {
            return Native.publicIdsEncode(ref.handle, publicId);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** The public ID a text reads as. @throws IdmintException {@code invalid_public_id} */
    public long decode(String text) {
        Objects.requireNonNull(text, "text");
        try {
            return Native.publicIdsDecode(ref.handle, text);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** The public ID of {@code id}, as text. */
    public String obfuscateText(long id) {
        try {
            return Native.publicIdsObfuscateText(ref.handle, id);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** The ID behind a public ID's text. */
    public long revealText(String text) {
        Objects.requireNonNull(text, "text");
        try {
            return Native.publicIdsRevealText(ref.handle, text);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** {@code dec}, {@code base32} or {@code sqids}. */
    public String format() {
        try {
            return Native.publicIdsFormat(ref.handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** The width of public IDs in bits. */
    public int bits() {
        try {
            return Native.publicIdsBits(ref.handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** The settings of {@code [obfuscation]}, with its defaults. */
    public static final class Builder {
        private final String key;
        private int bits = 63;
        private int keyIdBits;
        private int activeKey = -1;
        private String format = "dec";

        private Builder(String key) {
            this.key = key;
        }

        /** The width of public IDs (default 63). */
        public Builder bits(int bits) {
            this.bits = setting("bits", bits);
            return this;
        }

        /** Bits of the public ID that name the key (default 0: one key). */
        public Builder keyIdBits(int keyIdBits) {
            this.keyIdBits = setting("key_id_bits", keyIdBits);
            return this;
        }

        /** The key ID new public IDs are made with (default: the last key listed). */
        public Builder activeKey(int activeKey) {
            this.activeKey = setting("active_key", activeKey);
            return this;
        }

        /** {@code dec} (default), {@code base32} or {@code sqids}. */
        public Builder format(String format) {
            this.format = Objects.requireNonNull(format, "format");
            return this;
        }

        /** The settings are bytes in the config: refused by name otherwise. */
        private static int setting(String name, int value) {
            if (value < 0 || value > 255) {
                throw IdmintException.of("invalid_config", "obfuscation." + name + " = " + value + " is out of range");
            }
            return value;
        }

        /** @throws IdmintException {@code invalid_config} naming the setting (never quoting a key) */
        public PublicIds build() {
            return new PublicIds(Native.publicIdsNew(key, bits, keyIdBits, activeKey, format));
        }
    }
}
